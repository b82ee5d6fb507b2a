import sys

from mapper.cli.main import main

sys.exit(main())
