import sys

from studies.word_groups.report import main

sys.exit(main())
