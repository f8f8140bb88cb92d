"""The test suite (a regular package: verl's wheel installs a top-level `tests` package that would shadow a namespace
one in runner processes, which import test agents as `tests.programs...`)."""
