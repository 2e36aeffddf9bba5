"""How the API is served beyond FastAPI's routing: uvicorn's protocol with a header
deadline, the hottest requests (conditional job model polls, heartbeats, acks) answered
before routing, and the table of every API route."""
