# One papermill-executed notebook per figure; the executed copy is kept next to the figure.
rule figure:
    input:
        notebook="notebooks/{fig}.ipynb",
        summary=lambda w: FIGURES[w.fig]["summary"],
        host="results/host.json",
    output:
        png="results/figures/{fig}.png",
        pdf="results/figures/{fig}.pdf",
        notebook="results/notebooks/{fig}.ipynb",
    log:
        "results/logs/figures/{fig}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "papermill {input.notebook} {output.notebook} -p summary {input.summary}"
        " -p host {input.host} -p png {output.png} -p pdf {output.pdf} > {log} 2>&1"
