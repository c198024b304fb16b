"""The paper against its released code, measured (`python -m studies.released`; see runner.py)."""
