"""The budget fit where the allocator could not measure the step's peak
(`tfseg.runtime.peak`: None): its static estimate fixes the level instead."""

from tfseg.budget import fit as fit_lib


def _measured(**changes):
    m = {"batch": 2, "height": 100, "width": 100, "output_stride": 16, "timed_steps": 0,
         "base_bytes": 100, "peak_over_base_bytes": None,
         "analysis": {"estimated_peak_bytes": 1100,
                      "estimated_peak_by_batch": {"2": 1000, "4": 2000}}}
    return {**m, **changes}


def test_an_unknown_peak_fits_from_the_static_estimate():
    fit = fit_lib.fit(_measured(), budget_bytes=2700)
    # slope (2000 - 1000) / 2 = 500 a sample; fixed = 100 + 1100 (estimated) - 2 * 500 = 200
    assert (fit.per_sample_bytes, fit.fixed_bytes, fit.slope_from) == (500, 200, "analysis")
    assert fit.max_batch == 5
    # Without a second batch in the analysis, the whole estimate is taken as per-sample.
    single = fit_lib.fit(_measured(analysis={"estimated_peak_bytes": 1100,
                                             "estimated_peak_by_batch": {"2": 1000}}), 2700)
    assert (single.per_sample_bytes, single.slope_from) == (550, "estimate")
    assert fit_lib.level(_measured(peak_over_base_bytes=900)) == (900, "measured")
