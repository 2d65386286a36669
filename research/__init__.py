"""The lab beside the package: the paper's Table 1, its baselines, PEARL and Nugget tasks, the Williams test,
losses under study and the scripts behind the results page. Not installed; run from the repository root."""
