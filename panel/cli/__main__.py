from panel.cli.main import main

raise SystemExit(main())
