# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Data
#
# The paper trains on BookCorpus and English Wikipedia (about 3 billion words) with an uncased
# WordPiece vocabulary of about 30K tokens (Section 4.1). Neither corpus can be downloaded here,
# so the CPU profiles use real English text that ships inside packages on the package registries:
# Project Gutenberg books, Wikipedia lead sections and the Brown corpus, each pinned by
# its sha256. The `paper` profile reads BookCorpus and English Wikipedia through Hugging Face `datasets` instead.
#
# This section prepares the corpus of the chosen profile: it cleans the text, cuts it into
# documents, holds out a share of whole documents for validation, trains the WordPiece
# tokenizer on the training split only, and writes fixed-length token blocks. Every later
# section reads these blocks; the token counts below decide which tokens are "the N most
# frequent" that the paper's correlations are computed over.

# %% tags=["parameters"]
profile = None              # None: $TWOTOWER_PROFILE, else cpu; or tiny | cpu-long | gpu | paper (twotower_lib.book.profiles)
runs_dir = None             # where runs/<profile>/ lives; None: $TWOTOWER_RUNS, else the project's runs/
data_corpus = None          # None: the profile's corpus (registry, registry:brown, a .txt path, hf:NAME)
data_vocab_size = None      # None: the profile's WordPiece vocabulary size
data_seq_len = None         # None: the profile's block length in tokens
data_seed = None            # None: the profile's seed of the train/validation split
data_doc_words = None       # None: the profile's document length (long texts cut, short dataset rows packed)
data_max_docs = None        # None: the profile's; only the corpus's first this many documents (0: all)
data_valid_fraction = None  # None: the profile's share of documents held out

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "The code that loads the section"}
import pandas as pd
from IPython.display import Markdown

from twotower_lib.book import charts, render, sections
from twotower_lib.data import load_prepared, prepare_data

ctx = sections.open_section("00_data", globals())
render.enable()
ctx.parameter_table()

# %% [markdown]
# ## Preparing the corpus
#
# Preparation is skipped when the output already matches these settings (the manifest records
# the inputs' hashes), so re-running this notebook is cheap. A pinned corpus (the registry's, a Hugging
# Face dataset) is prepared once into the shared data cache (`$TWOTOWER_DATA/prepared/`) and copied from
# there into a new runs folder, each file checked against the manifest's sha256.

# %%
data = load_prepared(prepare_data(ctx.profile.data_config(), ctx.out / "prepared", cache=True))
m = data.manifest

# %% [markdown]
# ## Where the text comes from

# %%
pd.DataFrame([{"source": s["name"], "kind": s["kind"], "documents": s["documents"], "words": s["words"]}
              for s in m["sources"]]).set_index("source")

# %% [markdown]
# ## The splits
#
# Validation holds out whole documents, so no validation sentence was seen in training.
# Tokens that do not fill a last block are dropped; "tokens in blocks" is what the models see.

# %%
pd.DataFrame({split: {"documents": m["documents"][split], "words": m["words"][split],
                      "tokens": m["tokens"][split], "blocks": m["blocks"][split],
                      "tokens in blocks": m["block_tokens"][split]}
              for split in ("train", "valid")}).T

# %%
pd.Series({"vocabulary (WordPiece, uncased)": data.vocab_size, "block length (tokens)": data.seq_len,
           "tokenizer sha256": m["tokenizer_sha256"][:16] + "...", "data hash": data.data_hash[:16] + "..."},
          name="value").to_frame()

# %% [markdown]
# ## Token frequencies
#
# The paper compares preference scores over the most frequent 5000 tokens "to suppress noises
# introduced by rare words"; the CPU profiles use fewer (the profile's `analysis.top_n`), because a rare
# token occurs too seldom in a small validation text to score it reliably. The chart shows the counts
# against their rank on log-log axes (hover for the token; drag to pan, scroll to zoom).

# %%
counts = pd.DataFrame({"token": data.tokens,
                       "frequency": data.counts}).sort_values("frequency", ascending=False)
charts.frequency_chart(counts)

# %%
total = counts["frequency"].sum()
pd.DataFrame([{"top N tokens": n, "share of training tokens": f"{counts['frequency'].head(n).sum() / total:.1%}",
               "count of the N-th token": int(counts["frequency"].iloc[n - 1])}
              for n in (100, 1000, 5000) if n <= data.vocab_size]).set_index("top N tokens")

# %%
pd.Series({"tokens never seen in training": int((counts["frequency"] == 0).sum())}, name="value").to_frame()

# %%
counts.head(20).set_index(pd.RangeIndex(1, 21, name="rank"))

# %% [markdown]
# ## One training block, decoded

# %%
print(data.tokenizer.decode(data.train[len(data.train) // 2].tolist()))

# %% [markdown]
# ## Summary

# %% tags=["remove-input"]
Markdown(sections.corpus_summary(ctx, data))

# %%
ctx.finish(data_hash=data.data_hash, vocab_size=data.vocab_size, seq_len=data.seq_len,
           train_tokens=int(m["block_tokens"]["train"]), valid_tokens=int(m["block_tokens"]["valid"]),
           unigram_loss=round(data.unigram_loss(), 4));
