"""hw4's review of a kernel problem's timing (the plug-in's review_timing, read by worker.scoring):
what the stage's evidence of its composition-against-fused-op figure (`timing_evidence`,
rubrics/hw4/speed.py) says staff should see, and when the figure is not to be trusted.

- a composition much slower on the student's own basic ops than on ours (the review setting
  basic_ops_gap_flag, GAP_FLAG_DEFAULT where the rubric gives none): a slowed combine.cu, or a
  very slow one; it changes no point (the figure that scores runs on ours);
- a composition that spent more of its time off the CPU than the fused op (beyond
  worker.timing.IDLE_SLACK): an honest one never sleeps (both spin while the GPU works, the
  corpus's compositions run 98-99% on the CPU), and the CPU time of one that does still carries
  what each wake-up costs it (a cold GPU and caches): its speed points wait for staff;
- a fused op whose results took markedly longer to read than the composition's: that time is
  counted as the fused op's, and said so.
"""
from __future__ import annotations

from rubrics.hw4 import BASIC_OPS_GAP_FLAG
from worker.assignment import TimingReview, Words
from worker.measurements import ProblemMeasurement
from worker.rubric import ProblemScoring
from worker.scoring import WITHHELD_WORDS
from worker.timing import waited_beyond_slack

OWN_OPS_FILE = "combine.cu"  # the student's basic ops, named in the flag of a slow composition
GAP_FLAG_DEFAULT = 1.5
DEFERRED_FLAG_SHARE = 0.10  # a fused op whose deferred read is this share of its time is flagged


def waited_off_cpu(m: ProblemMeasurement) -> str | None:
    """Why the composition's figure is not trusted, when it spent more of its time off the CPU
    than the fused op beyond the slack, or None."""
    ev = m.telemetry.get("timing_evidence") or {}
    custom_share = ev.get("custom_cpu_share")
    for variant in ("reference_ops", "baseline"):
        share = ev.get(f"{variant}_cpu_share")
        if share is not None and custom_share is not None and waited_beyond_slack(share, custom_share):
            return (f"{m.problem_id}: your composition spent {1 - share:.0%} of its time off the CPU (the fused op "
                    f"{1 - custom_share:.0%}), as code that sleeps does")
    return None


def review_timing(spec: ProblemScoring, m: ProblemMeasurement, words: Words) -> TimingReview:
    pid, ev, flags = m.problem_id, m.telemetry.get("timing_evidence") or {}, []
    gap, flag_at = ev.get("own_ops_vs_reference_ops"), spec.review.get(BASIC_OPS_GAP_FLAG, GAP_FLAG_DEFAULT)
    if flag_at is not None and gap is not None and gap >= flag_at:
        flags.append(f"{pid}: your composition runs {gap:.2g}x slower on your own basic ops ({OWN_OPS_FILE}) than "
                     "on the reference basic ops; speed points use the reference ones")
    waited = waited_off_cpu(m)
    if waited:
        flags.append(f"{waited}: {WITHHELD_WORDS}")
    deferred = ev.get("deferred_share")
    if deferred is not None and deferred >= DEFERRED_FLAG_SHARE:
        flags.append(f"{pid}: reading your fused op's results took longer than reading the composition's; "
                     f"that extra time ({deferred:.0%} of the fused op's) is counted as the fused op's")
    return TimingReview(flags, withheld=waited is not None)
