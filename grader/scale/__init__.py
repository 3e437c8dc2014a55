"""Starting GPU workers where a scheduler runs them: `decision` (how many, pure) and `slurm` (sbatch, squeue)."""
