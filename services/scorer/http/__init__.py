"""The scorer's HTTP edge (OpenRLHF's /get_reward, a JSON Score, health, metrics): bounded bodies, Starlette routes.
Imports `services.web`, `services.grpc_errors` and the scorer's core (service, errors); nothing else of the project."""
