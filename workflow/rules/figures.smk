# One papermill-executed notebook per figure; the executed copy is kept next to the figure.
rule figure:
    input:
        notebook=lambda w: FIGURES[w.fig]["notebook"],
        summaries=lambda w: FIGURES[w.fig]["summaries"],
        host="results/host.json",
        plan="results/plan.json",
    output:
        png=report(
            "results/figures/{fig}.png",
            caption="../report/figure.rst",
            category="Figures",
            labels=figure_labels,
        ),
        pdf="results/figures/{fig}.pdf",
        notebook="results/notebooks/{fig}.ipynb",
    log:
        "results/logs/figures/{fig}.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        parameters=figure_parameters,
    shell:
        "papermill {input.notebook:q} {output.notebook:q} -y {params.parameters} > {log:q} 2>&1"
