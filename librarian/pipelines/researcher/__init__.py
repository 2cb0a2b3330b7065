"""`librarian train_researcher`: JAM, verified-trajectory SFT then hint-guided GRPO (paper 002)."""
