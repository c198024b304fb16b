import sys

from studies.released.runner import main

sys.exit(main())
