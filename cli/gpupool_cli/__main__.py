"""`python -m gpupool_cli` = `gpupool`."""

from gpupool_cli.main import main

raise SystemExit(main())
