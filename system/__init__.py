"""The whole system on one machine, above every service: `cheems up` (plan, supervisor, up), `cheems status`
(status) and the demo that runs the loop through the services."""
