"""Reward-model training: `preferences` (raw rated answers -> TRL pairs) and `train` (TRL's RewardTrainer)."""
