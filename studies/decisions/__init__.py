"""The decisions study: the numbers behind each profile's choices (`python -m studies.decisions`; see report.py)."""
