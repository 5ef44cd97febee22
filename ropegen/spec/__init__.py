"""The front end: spec text -> syntax tree -> checked IR, with diagnostics that carry file:line:col. Names no target."""
