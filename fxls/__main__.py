from fxls.cli import main

raise SystemExit(main())
