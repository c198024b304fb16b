import sys

from studies.register.runner import main

sys.exit(main())
