"""Coverage-guided fuzzing (atheris, libFuzzer) of every decoder that takes outside bytes.

``python -m fuzz.run TARGET`` fuzzes one harness of :mod:`fuzz.targets`; ``make fuzz``
runs them all. The harnesses are plain functions of bytes, so the test suite also runs
them without atheris (``tests/fuzz/test_atheris_targets.py``).
"""
