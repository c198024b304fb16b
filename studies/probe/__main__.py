import sys

from studies.probe.report import write_book

if sys.argv[1:] != ["book"]:
    sys.exit("usage: python -m studies.probe book   (rewrites results/probe/book.json from the committed measurements)")
print(f"book parts -> {write_book()}")
