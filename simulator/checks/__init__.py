"""The simulator's checks of a kernel, one row each in ``table.CHECKS``: static analyses over the
IR before it runs (``bounds``, ``capacity``, ``races``, ``lnc_races``, ``unwritten``), the
host-memory check at the start of every run (``capacity``), the run-time checks the interpreter
calls (equal writes by both LNC cores: ``lnc_writes``; unwritten output elements under
``checks="full"``: ``unwritten``), and the coverage analysis they share (``coverage``).
``static.static_checks`` and ``static.start_checks`` run the table's rows."""
