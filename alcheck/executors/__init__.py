"""Where a sweep's cells run: in this process (`local.py`), over one worker process per device
(`devices.py`), or on tensor-parallel ranks (`tensor_parallel.py`), with the process helpers they
share (`processes.py`). An executor takes a CellPlan, the pending cells and an events object; it
never imports the sweep that chose it."""
