"""The annotator's web page: sign-in, each annotator's next task, the submit form, the admin overview, static files.
Imports `cheems`, `services.store`, `services.web`, `annotation.algorithm` and the annotation service's submit path."""
