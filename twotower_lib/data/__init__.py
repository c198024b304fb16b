"""Data: corpus sources, cleaning, WordPiece tokenizer, token blocks (see `prepare.py`)."""

from twotower_lib.data.blocks import PreparedData, load_prepared
from twotower_lib.data.config import DataConfig, data_home, prepared_dir
from twotower_lib.data.prepare import prepare_data

__all__ = ["DataConfig", "PreparedData", "data_home", "load_prepared", "prepare_data", "prepared_dir"]
