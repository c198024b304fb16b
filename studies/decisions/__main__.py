from studies.decisions.report import write_book

print(f"decisions page numbers -> {write_book()}")
