"""CMU 11-868 llmsys_hw4 (fused softmax and LayerNorm CUDA kernels) as a plug-in: the one
object generic code reaches it through (worker.assignment; rubrics/hw4/rubric.yaml names this module).

Kept light (a sandboxed child imports it): the stage's modules and the timing review (numpy, the
GPU client) are imported only when used.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rubrics.hw4 import gpu_time
from worker.assignment import GpuStage, Plugin, StageConfig, StageProgress, TimingReview, Words

if TYPE_CHECKING:  # pragma: no cover
    from worker.measurements import ProblemMeasurement
    from worker.rubric import ProblemScoring


# The review setting (a rubric's scoring `review:`) that flags a composition this many times
# slower on the student's own basic ops than on ours (rubrics/hw4/timing_review.py).
BASIC_OPS_GAP_FLAG = "basic_ops_gap_flag"


def make_stage(config: StageConfig, progress: StageProgress) -> GpuStage:
    from rubrics.hw4.grade import stage_for

    return stage_for(config, progress)


def review_timing(spec: ProblemScoring, m: ProblemMeasurement, words: Words) -> TimingReview:
    from rubrics.hw4.timing_review import review_timing as review

    return review(spec, m, words)


ASSIGNMENT = Plugin(
    zip_folder="llmsys_hw4",  # the course's repository name: students zip that folder
    make_stage=make_stage,
    stage_needs_gpu=True,
    mutants_file=Path(__file__).with_name("mutants.yaml"),
    words=Words(
        routes={"abi": "C ABI", "binding": "binding"},
        figures={
            "reference_ops": "your fused op vs your MiniTorch's composition on the reference basic ops",
            "student": "your fused op vs your MiniTorch's composition on your own basic ops",
            "trusted": "the reference kit's fused op vs its composition (information only)",
        },
    ),
    calibration_warning="our reference kit, whose MiniTorch is faster than an ordinary student's; "
                        "prefer known-correct submissions",
    gpu_time=gpu_time.gpu_time,
    timing_seconds=gpu_time.timing_seconds,
    review_timing=review_timing,
    review_settings=(BASIC_OPS_GAP_FLAG,),
)
