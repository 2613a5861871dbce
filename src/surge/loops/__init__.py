"""The loops: fit (epochs, steps, accumulation), evaluation and prediction."""
