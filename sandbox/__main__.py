"""``python -m sandbox start|stop|serve --dir D``: see :mod:`sandbox.detached`."""

import sys

from sandbox.detached import main

if __name__ == "__main__":
    sys.exit(main())
