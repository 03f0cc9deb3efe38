# One job = every repetition of one tool x app x scenario (the DAG of the paper's matrix stays
# small). The job provisions the platform, runs the harness inside, verifies what the harness
# observed against the scenario, tears the platform down, and only then writes its result.
rule benchmark:
    input:
        dataset="resources/datasets/{app}",
        host="results/host.json",
        images=platform_images,
    output:
        run=RUN_FILE,
        loadgen=directory(LOADGEN_DIR),
    params:
        spec=job_spec,
    resources:
        bench=1,
        # minutes, for cluster executors: beyond the harness's own timeout, so teardown runs first
        runtime=int(config["harness"]["timeout_s"] // 60) + 30,
    log:
        "results/logs/benchmark/{tool}/{app}/{platform}/{cores}/{pinning}/{processor}.log",
    conda:
        framework_env
    shell:
        "python -m dlvirt bench --spec {params.spec} --output {output.run:q}"
        " --loadgen-dir {output.loadgen:q} > {log:q} 2>&1"
