"""Sample generations per step: prompt, response, reward, KL and other scores."""
