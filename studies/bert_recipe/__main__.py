import sys

from studies.bert_recipe.runner import cli

sys.exit(cli())
