"""The probe's validation studies: the committed measurements of the instrument in `results/probe/` (made by
the scripts in `benchmarks/` that each file names) and `report`, which writes what the appendix notebook
`08_probe_validation` shows into `results/probe/book.json` (`python -m studies.probe book`)."""
