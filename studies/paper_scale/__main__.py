import sys

from studies.paper_scale.runner import main

sys.exit(main())
