"""DPO from traces: online on the training loop (`DPO`) or offline from exported pairs (`dpo_from_pairs`)."""
