"""Pilots of BERT training recipes: which lever makes the towers learn context (results/bert_recipe)."""
