"""Learn stage: objective, samples, trainer, adapter writer."""
