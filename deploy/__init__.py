"""Deployment: TLS credentials (`make_certs`), the site registry's command (`register`), the local
SuperLink/SuperNode launcher (`launch`) and the fork server a site's ClientApp processes come from
(`forkserver`, which the site's warm worker in `client_app.worker` joins)."""
