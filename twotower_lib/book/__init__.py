"""The book production: everything between the science (`data`, `models`, `train`, `probe`,
`preference`, `analysis`) and the rendered book.

- `profiles`: the settings bundles (`tiny`, `cpu`, `cpu-long`, `gpu`, `paper`);
- `sections`: the book's sections and the context a running notebook gets (`open_section`);
- `training`, `probing`, `analyses`: what the section notebooks call, stage by stage;
- `pipeline`: runs the sections with papermill, re-running only what is stale (`run`);
- `scorecard`, `paper_tables`, `charts`: the paper's items and tables beside ours, the charts;
- `build`: the jupyter-book build (`book`) and its Sphinx extension; `publish`: a finished
  profile's results committed to `results/profiles/`; `study_parts`: what the committed studies
  give the book, read from their `results/<study>/book.json` (no study is imported).
"""
