"""Models by name: real ones a CPU machine trains, built offline from the package index (`smollm2`), and the name
resolution every command that takes `--model` shares (`named`). Imports nothing else of ours."""
