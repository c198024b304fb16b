"""The paper's cases at Table 1 sizes on one GPU, packed and tabled (`python -m studies.paper_scale`; see runner.py)."""
