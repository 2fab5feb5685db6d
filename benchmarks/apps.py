from django.apps import AppConfig


class BenchmarksConfig(AppConfig):
    name = "benchmarks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The benchmark is a job kind of its own: it plugs into jobs from here (jobs/registry.py).
        from benchmarks.kind import run_benchmark
        from benchmarks.params import BENCHMARK_PARAMS, validate_benchmark_params
        from benchmarks.services import benchmark_job_ended, benchmark_relaunch
        from jobs.models import JobKind
        from jobs.registry import register_kind

        register_kind(JobKind.BENCHMARK, run_benchmark, params=BENCHMARK_PARAMS, validate=validate_benchmark_params,
                      relaunch=benchmark_relaunch, ended=benchmark_job_ended)
