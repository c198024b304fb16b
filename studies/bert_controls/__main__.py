from studies.bert_controls.report import write_book

print(f"Bert-large controls' book parts -> {write_book()}")
