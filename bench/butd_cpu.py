"""The old name of ``bench/butd_extract.py`` (R101-C4 extraction images/s), kept so old invocations still run.

The first version only timed the CPU at batch 1, stage by stage; the bench now covers CUDA with bf16 and
batches 8 and 16, and prints end-to-end images/s (``--stages`` adds the per-stage table). Every option of
``butd_extract.py`` works here, including the old ``--batch N``:

    python bench/butd_cpu.py --small --stages                           # the old CPU table, batch 1 and 2
    python bench/butd_cpu.py --device cuda --precision bf16 --batch 8
"""

from __future__ import annotations

from butd_extract import main

if __name__ == "__main__":
    main()
