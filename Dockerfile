FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml ./
COPY . .
RUN pip install --no-cache-dir -e . && python manage.py collectstatic --noinput -v0
EXPOSE 8000
