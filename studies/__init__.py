"""One-off studies whose results are committed under `results/<study>/`.

Studies sit above the library: they import `twotower_lib` (the core and the book's production),
and nothing imports them. Each has a runner (`python -m studies.<name>`) and writes its numbers
and a README into `results/<name>/`; the book reads only those files.
"""

import twotower_lib  # noqa: E402,F401 - first, so a study's numpy runs the library's pinned kernels (`workers.pin_cpu_kernels`)
