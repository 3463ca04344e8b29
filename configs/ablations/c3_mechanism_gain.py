# Pre-registered (committed before its first record): the width question of c3_mechanism_width.py
# asked again so that it can answer. That file compared unified (IWD: decay on its input-role scales)
# with norm_only (no decay on scales), so a shrinking gamma, which IWD produces, read as the mechanism;
# its statistic (amp_ratio, now move_ratio) is 1 for every constant gamma, so it could not see the
# preconditioner; and its widths trained 340 and 1,080 steps. Here:
#   - IWD is out of both arms: unified's scale vectors with scale_wd="none" (unified_nowd) against
#     norm_only, also scale_wd="none" (both keep weight decay on the matrices); DNP's normalization
#     over d_ff is in both (mlp_placement dual_norm against in_norm), so the arms differ in the
#     scale vectors alone (HG, DNP's u and v, OR);
#   - the statistic is gain (mechanism.SITE_STATISTICS): per input-role site, the folded map's step
#     over the step plain gradient descent on W~ itself would take with the same LRs and gradients,
#     gamma^2 under SGD with a constant gamma. Under AdamW it reads gamma times Adam's step per unit
#     of gradient (proportional to gamma, not gamma^2, and to 1 / the gradients' scale:
#     tests/test_gain.py), so it compares the two arms only as far as their gradients have one scale,
#     and never runs across optimizers (these words corrected after the records; the design is as
#     registered);
#   - both widths train the same 600 steps of the same 4,096 characters: equal length, so the width
#     contrast is one of size at equal steps and tokens (w32 sees ~35 characters per parameter of
#     its 69,920, w64 ~11 of its 221,760: the data per parameter differs with the size).
# The one scalar per run: research/stats.py mechanism_scalar(record, "gain"), the mean over the run's
# input-role sites of gain's mean over its 5 evaluation intervals. Rows, a family of their own (BH
# over these 3): per width, unified_nowd - norm_only paired by seed (Student t over the 6 seeds); and
# the w64 differences minus the w32 ones, unpaired (Welch). No direction is claimed. The loss row is
# a control (no expected direction), outside the summary's correction.
# LRs: both arms at learning_rate 6e-3, min_lr 6e-4, as c3_mechanism_width (equal LRs: the steps these
# statistics read scale with the LR); not tuned here (a limit, said beside the answer). Seeds 31-36,
# new, planned, none added. AdamW + cosine, compiled, one thread per run.
claim = "C3's mechanism with IWD in neither arm: unified's scale vectors change the gain of their folded maps' steps over the scale-free gradient step against norm_only's, and the change differs between widths 32 and 64 at equal steps"
base = "configs/ablation_base.py"
_LR = {"learning_rate": 6e-3, "min_lr": 6e-4}
variants = {
    "norm_only": {"mlp_placement": "in_norm", "scale_wd": "none", **_LR},
    "unified_nowd": {"branch_scales": True, "mlp_placement": "dual_norm", "reparam": "or", "scale_wd": "none", **_LR},
}
settings = {
    "w32": {"optimizer": "adamw", "lr_schedule": "cosine", "n_embd": 32, "n_head": 1,
            "max_iters": 600, "warmup_iters": 60, "eval_interval": 120},
    "w64": {"optimizer": "adamw", "lr_schedule": "cosine", "n_embd": 64, "n_head": 2,
            "max_iters": 600, "warmup_iters": 60, "eval_interval": 120},
}
seeds = [31, 32, 33, 34, 35, 36]
mechanism_question = {"variant": "unified_nowd", "reference": "norm_only", "settings": ["w32", "w64"],
                      "statistic": "gain"}
