FROM python:3.11-slim
# The Docker client, for agents that run pods as containers of the host's Docker Engine.
COPY --from=docker:28-cli /usr/local/bin/docker /usr/local/bin/docker
WORKDIR /app
COPY pyproject.toml ./
COPY . .
RUN pip install --no-cache-dir -e . && python manage.py collectstatic --noinput -v0
EXPOSE 8000
