"""The simulator's checks of a kernel: static analyses over the IR before it runs (``bounds``,
``capacity``, ``races``, ``lnc_races``, ``unwritten``), the run-time check of equal writes by
both LNC cores (``lnc_writes``), and the coverage analysis they share (``coverage``).
``static.static_checks`` runs the static ones."""
