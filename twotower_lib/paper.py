"""The paper's numbers, written once: every value He & Toyoizumi report that this companion compares with.

The library's analyses (POS, ICA, word groups), the book's scorecard, tables and charts, and the studies read
them from here; a test (`tests/test_paper_numbers.py`) fails on one of them typed anywhere else. Names follow
the paper's tables and figures; the model names are the paper's ("Bert-large-run1" is its first Bert-large run).
"""

from __future__ import annotations

# Table 1: layers, hidden size, intermediate size, attention heads (None: not an LSTM's), and the vocabulary.
TABLE1 = {"ELMo": (2, 4096, None, None), "GPT": (12, 768, 3072, 12), "Bert-base": (12, 384, 1024, 12),
          "Bert-large": (24, 512, 2048, 16)}
TABLE1_VOCAB = 30522  # the paper's WordPiece vocabulary (Section 4.1)

# Table 2: Pearson r of Eq. 4's score over the 5000 most frequent tokens, each pair once.
SAME_CONFIG_R = 0.94  # Bert-large run 1 vs run 2: the paper's one same-configuration pair
TABLE2 = {
    ("ELMo", "GPT"): 0.91, ("ELMo", "Bert-base"): 0.27, ("ELMo", "Bert-large-run1"): 0.57,
    ("ELMo", "Bert-large-run2"): 0.61, ("GPT", "Bert-base"): 0.26, ("GPT", "Bert-large-run1"): 0.57,
    ("GPT", "Bert-large-run2"): 0.63, ("Bert-base", "Bert-large-run1"): 0.72, ("Bert-base", "Bert-large-run2"): 0.62,
    ("Bert-large-run1", "Bert-large-run2"): SAME_CONFIG_R}
# Table 4: Spearman rho over the 5000 most frequent tokens, and each model's scores against frequency rank.
TABLE4 = {
    ("ELMo", "GPT"): 0.93, ("ELMo", "Bert-large"): 0.56, ("GPT", "Bert-large"): 0.65,
    ("ELMo", "Frequency Rank"): 0.16, ("GPT", "Frequency Rank"): 0.22, ("Bert-large", "Frequency Rank"): 0.18}
FREQUENCY_RANGE = (min(v for k, v in TABLE4.items() if "Frequency Rank" in k),
                   max(v for k, v in TABLE4.items() if "Frequency Rank" in k))

# Fig. 4: the tags the paper discusses, and which tower it says prefers each ("spread": no side).
FIG4_TAGS = ("PROPN", "NOUN", "ADJ", "AUX", "ADP", "ADV", "VERB")
FIG4_CLAIM = {"VERB": "primary", "ADP": "primary", "ADV": "primary", "AUX": "primary",
              "PROPN": "secondary", "NOUN": "spread", "ADJ": "spread"}

# Fig. 5 and Fig. 6 (Section 5.3): the share of ICA values within [-1, 1], and how many groups a word is in.
FIG5_WITHIN_1 = 0.80
FIG6 = {"share_one": 0.45, "share_none": 0.13, "mean_groups": 1.45}
ICA_DIM, ICA_WIDTH = 128, 1024  # the paper kept d = 128 of a 1,024-wide embedding (2 x 512)
