"""Run reference examples unmodified (``python -m frontends.compat example_check.py
example.py [more.py ...]``, each in a fresh namespace), then check what each left: where it
defines ``cpu_out`` and ``neuron_out``, they must agree under ``torch.testing.assert_close``'s
default tolerances (an example that computes both without asserting is still checked). Prints
``EXAMPLE OK <script>`` per example."""

import runpy
import sys

for script in sys.argv[1:]:
    namespace = runpy.run_path(script, run_name="__main__")
    if "cpu_out" in namespace and "neuron_out" in namespace:
        import torch

        torch.testing.assert_close(namespace["cpu_out"], namespace["neuron_out"])
        print("outputs match the CPU reference")
    print(f"EXAMPLE OK {script}")
