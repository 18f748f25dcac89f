"""``python3 -m pdcx.hdf5 import|export ...``: what ``pdcx import`` and ``pdcx export`` run."""

import sys

from ._cli import main

sys.exit(main())
