"""The default profile with Bert-large's controls too, as the book shows it (`python -m studies.bert_controls`;
see report.py)."""
