import sys

from mapper.cli import main

sys.exit(main())
