"""The register study: pairs trained on one corpus source alone (`python -m studies.register`; see runner.py)."""
