import sys

from studies.fig5_control.report import main

sys.exit(main())
