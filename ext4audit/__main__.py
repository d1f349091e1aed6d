import sys

from .forkserver import main

sys.exit(main())
