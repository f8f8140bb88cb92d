"""A training run as `lightning-otel train` makes it: its settings resolved from flags and the model's recipe
(`plan`, `recipes`), the algorithm built from them (`backends`), the folder that keeps what it made (`run_folder`),
the model exported as a Hugging Face folder (`model_export`), a supervised warm start (`warm_start`), held-out
rewards measured outside the loop (`evaluation`) and whether it learned (`verdict`, `run_report`, `reward_curve`)."""
